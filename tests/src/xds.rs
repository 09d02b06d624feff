//! A simulated sidecar: an xDS client that connects to istiod the way an
//! Envoy sidecar does (one ADS stream per proxy) and records what it is sent.
//!
//! It exists to measure what a Sidecar resource changes in a proxy's config
//! (how many clusters, listeners, routes and endpoints, and how many bytes)
//! and when istiod pushes, without running Envoy. See `tests/istiod/README.md`
//! ("The simulated sidecar").
//!
//! The protocol is the state-of-the-world ADS variant:
//!
//! * the first request carries the [`Node`]; later ones do not;
//! * CDS and LDS are wildcard subscriptions, and each response is the full
//!   set (the local map is replaced);
//! * EDS is subscribed for every cluster of type `EDS` (its
//!   `eds_cluster_config.service_name`, or the cluster name), and RDS for
//!   every `route_config_name` of an `HttpConnectionManager` with `rds` in
//!   the listeners; both are re-subscribed when those sets change. Their
//!   responses are merged into the local map (istiod sends only the changed
//!   ClusterLoadAssignments), and names no longer subscribed are dropped;
//! * every response is ACKed with its `version_info` and `response_nonce`
//!   and the current resource names of its type. Nothing is ever NACKed.
//!
//! Sizes: a resource's size is the length of the encoded protobuf in its
//! `google.protobuf.Any.value`, i.e. the encoded `Cluster`, `Listener`,
//! `RouteConfiguration` or `ClusterLoadAssignment` message, without the
//! `Any` wrapper and type URL. They depend on the node metadata, so compare
//! sizes only between proxies built from the same [`ProxySpec`].
//!
//! [`Sim`] is a blocking API for ordinary (non-async) tests and benchmarks:
//! it owns one tokio runtime, multiplexes the streams over a few HTTP/2
//! connections, and must not be created, used or dropped from inside
//! another tokio runtime's async context.

use meshscope_shared::inject::Gateway;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{value::Kind, Any, Struct, Value};
use prost::Message as _;
use tokio::sync::{mpsc, Semaphore};
use tonic::transport::{Channel, Endpoint};

/// Type URL of CDS resources.
pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// Type URL of LDS resources.
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// Type URL of RDS resources.
pub const ROUTE_TYPE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// Type URL of EDS resources.
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

pub mod refs;

use refs::{DanglingRef, Episode, RefState, HCM_TYPE};

/// The version istiod is built with (`tests/istiod/build`): `ISTIO_VERSION`
/// must match it, or istiod treats the proxy as another version.
pub const DEFAULT_ISTIO_VERSION: &str = "1.31-dev";

/// The four resource types, as (short name, type URL), in the order istiod
/// pushes them.
pub const TYPES: [(&str, &str); 4] = [
    ("cds", CLUSTER_TYPE),
    ("eds", ENDPOINT_TYPE),
    ("lds", LISTENER_TYPE),
    ("rds", ROUTE_TYPE),
];

/// `"cds"`, `"lds"`, `"rds"`, `"eds"` for the four type URLs, else `None`.
pub fn short_type(type_url: &str) -> Option<&'static str> {
    TYPES.iter().find(|(_, u)| *u == type_url).map(|(s, _)| *s)
}

// ---------------------------------------------------------------------------
// The proxy's identity

/// Who a simulated proxy claims to be. Build the [`Node`] with
/// [`ProxySpec::node`]; for a given spec it is the same every time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxySpec {
    pub namespace: String,
    pub pod_name: String,
    pub pod_ip: String,
    /// The pod's labels. istiod prefers the labels of the Pod it finds by
    /// IP or name, but sends these when there is none.
    pub labels: BTreeMap<String, String>,
    pub service_account: String,
    pub workload_name: String,
    /// Must be istiod's own version ([`DEFAULT_ISTIO_VERSION`]).
    pub istio_version: String,
    /// `NODE_NAME` (the pod's `spec.nodeName`); empty sends `meshscope-sim`.
    pub node_name: String,
    /// Connects as a gateway (`router`) or a waypoint (`waypoint`), not a
    /// `sidecar`.
    pub gateway: Option<Gateway>,
}

impl ProxySpec {
    /// A spec with service account `default`, workload name = pod name, no
    /// labels and [`DEFAULT_ISTIO_VERSION`].
    pub fn new(namespace: &str, pod_name: &str, pod_ip: &str) -> Self {
        ProxySpec {
            namespace: namespace.into(),
            pod_name: pod_name.into(),
            pod_ip: pod_ip.into(),
            labels: BTreeMap::new(),
            service_account: "default".into(),
            workload_name: pod_name.into(),
            istio_version: DEFAULT_ISTIO_VERSION.into(),
            node_name: String::new(),
            gateway: None,
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// `ns/name`, the key used in reports.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.pod_name)
    }

    /// `<pod>.<ns>`: the proxy ID of istiod's debug endpoints
    /// (`/debug/sidecarz?proxyID=...`).
    pub fn proxy_id(&self) -> String {
        format!("{}.{}", self.pod_name, self.namespace)
    }

    /// `sidecar~<podIP>~<pod>.<ns>~<ns>.svc.cluster.local` (`router~...`
    /// for a gateway, `waypoint~...` for a waypoint).
    pub fn node_id(&self) -> String {
        format!(
            "{}~{}~{}.{}~{}.svc.cluster.local",
            self.gateway.map_or("sidecar", Gateway::as_str),
            self.pod_ip,
            self.pod_name,
            self.namespace,
            self.namespace
        )
    }

    /// The node metadata (what pilot-agent sends for a sidecar, reduced to
    /// the fields istiod needs).
    pub fn metadata(&self) -> Struct {
        let labels = Struct {
            fields: self
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), string_value(v)))
                .collect(),
        };
        let node_name = if self.node_name.is_empty() {
            "meshscope-sim"
        } else {
            &self.node_name
        };
        let mut fields = HashMap::new();
        for (k, v) in [
            ("NAMESPACE", self.namespace.as_str()),
            ("NAME", &self.pod_name),
            ("INSTANCE_IPS", &self.pod_ip),
            ("CLUSTER_ID", "Kubernetes"),
            ("ISTIO_VERSION", &self.istio_version),
            ("SERVICE_ACCOUNT", &self.service_account),
            ("WORKLOAD_NAME", &self.workload_name),
            ("MESH_ID", "cluster.local"),
            ("NODE_NAME", node_name),
        ] {
            fields.insert(k.to_string(), string_value(v));
        }
        fields.insert("LABELS".into(), struct_value(labels));
        fields.insert("PROXY_CONFIG".into(), struct_value(Struct::default()));
        Struct { fields }
    }

    pub fn node(&self) -> Node {
        Node {
            id: self.node_id(),
            metadata: Some(self.metadata()),
            ..Default::default()
        }
    }
}

fn string_value(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

fn struct_value(s: Struct) -> Value {
    Value {
        kind: Some(Kind::StructValue(s)),
    }
}

// ---------------------------------------------------------------------------
// Reading resources

/// A cluster's discovery type, decoded from CDS.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterType {
    Static,
    StrictDns,
    LogicalDns,
    Eds,
    OriginalDst,
    /// `cluster_type` (a custom cluster, e.g. an aggregate) with its name.
    Custom(String),
    /// A `type` value this client does not know.
    Unknown(i32),
}

impl ClusterType {
    pub fn of(c: &Cluster) -> ClusterType {
        match &c.cluster_discovery_type {
            // An unset `type` is 0, STATIC.
            None => ClusterType::Static,
            Some(cluster::ClusterDiscoveryType::ClusterType(t)) => {
                ClusterType::Custom(t.name.clone())
            }
            Some(cluster::ClusterDiscoveryType::Type(t)) => {
                match cluster::DiscoveryType::try_from(*t) {
                    Ok(cluster::DiscoveryType::Static) => ClusterType::Static,
                    Ok(cluster::DiscoveryType::StrictDns) => ClusterType::StrictDns,
                    Ok(cluster::DiscoveryType::LogicalDns) => ClusterType::LogicalDns,
                    Ok(cluster::DiscoveryType::Eds) => ClusterType::Eds,
                    Ok(cluster::DiscoveryType::OriginalDst) => ClusterType::OriginalDst,
                    Err(_) => ClusterType::Unknown(*t),
                }
            }
        }
    }

    /// `EDS`, `STRICT_DNS`, ... as in Envoy's config dump.
    pub fn as_str(&self) -> &str {
        match self {
            ClusterType::Static => "STATIC",
            ClusterType::StrictDns => "STRICT_DNS",
            ClusterType::LogicalDns => "LOGICAL_DNS",
            ClusterType::Eds => "EDS",
            ClusterType::OriginalDst => "ORIGINAL_DST",
            ClusterType::Custom(n) => n,
            ClusterType::Unknown(_) => "UNKNOWN",
        }
    }
}

/// The EDS resource name a cluster needs, if it is an EDS cluster:
/// `eds_cluster_config.service_name`, or the cluster name when that is empty.
pub fn eds_resource_name(c: &Cluster) -> Option<String> {
    if ClusterType::of(c) != ClusterType::Eds {
        return None;
    }
    let service = c
        .eds_cluster_config
        .as_ref()
        .map(|e| e.service_name.as_str())
        .unwrap_or("");
    Some(if service.is_empty() {
        c.name.clone()
    } else {
        service.to_string()
    })
}

/// The `route_config_name`s of the HttpConnectionManagers (with `rds`) in a
/// listener's filter chains and default filter chain.
pub fn route_names(l: &Listener) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let chains = l.filter_chains.iter().chain(l.default_filter_chain.iter());
    for chain in chains {
        collect_routes(chain, &mut out);
    }
    out
}

fn collect_routes(chain: &FilterChain, out: &mut BTreeSet<String>) {
    for f in &chain.filters {
        let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            continue;
        };
        if any.type_url != HCM_TYPE {
            continue;
        }
        let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice()) else {
            continue;
        };
        if let Some(RouteSpecifier::Rds(rds)) = hcm.route_specifier {
            if !rds.route_config_name.is_empty() {
                out.insert(rds.route_config_name);
            }
        }
    }
}

/// Only field 1 of a message: `name` of Cluster, Listener and
/// RouteConfiguration, `cluster_name` of ClusterLoadAssignment. Decoding
/// just that skips the (large) rest of RDS and EDS resources.
#[derive(Clone, PartialEq, prost::Message)]
struct NameOnly {
    #[prost(string, tag = "1")]
    name: String,
}

fn resource_name(any: &Any) -> Result<String> {
    Ok(NameOnly::decode(any.value.as_slice())?.name)
}

// ---------------------------------------------------------------------------
// Pure state logic

/// Replace a whole map (a state-of-the-world wildcard response: CDS, LDS).
pub fn replace_all(
    map: &mut BTreeMap<String, u64>,
    resources: impl IntoIterator<Item = (String, u64)>,
) {
    *map = resources.into_iter().collect();
}

/// Merge a response for a non-wildcard type (EDS, RDS) into the map: the
/// resources it carries replace their previous sizes, others stay (istiod
/// sends only the changed ClusterLoadAssignments), and only subscribed names
/// are kept (a reply may still answer names no longer subscribed, and
/// unsubscribed names are never sent again).
pub fn merge_subscribed(
    map: &mut BTreeMap<String, u64>,
    resources: impl IntoIterator<Item = (String, u64)>,
    subscribed: &BTreeSet<String>,
) {
    for (name, bytes) in resources {
        if subscribed.contains(&name) {
            map.insert(name, bytes);
        }
    }
    map.retain(|name, _| subscribed.contains(name));
}

/// What changed between two subscription sets: (added, removed).
pub fn subscription_delta(
    old: &BTreeSet<String>,
    new: &BTreeSet<String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    (
        new.difference(old).cloned().collect(),
        old.difference(new).cloned().collect(),
    )
}

/// One response received.
#[derive(Clone, Debug)]
pub struct Push {
    /// When the response was read from the stream.
    pub at: Instant,
    pub type_url: String,
    /// `"cds"`, `"lds"`, `"rds"`, `"eds"`, or `"other"`.
    pub ty: &'static str,
    pub version: String,
    pub nonce: String,
    /// Resources in this response (for EDS only the changed ones).
    pub resources: usize,
    /// Sum of the resources' encoded sizes (their `Any.value` lengths).
    pub bytes: u64,
    /// The encoded size of the whole `DiscoveryResponse`.
    pub wire_bytes: u64,
    /// When the ACK was handed to the request stream (it is sent from there
    /// without further waiting); `None` until then.
    pub acked_at: Option<Instant>,
}

/// What one CDS push changed in a proxy's clusters (recorded with
/// [`XdsState::track_references`]), with the push's receipt and ACK: the
/// push-level view of a scope change that write-order checks read
/// ([`crate::watcher::check_order`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterChange {
    /// When the push was received (and applied).
    pub at: Instant,
    /// When it was ACKed; `None` until then.
    pub acked_at: Option<Instant>,
    pub nonce: String,
    pub added: BTreeSet<String>,
    pub removed: BTreeSet<String>,
}

/// Per-type state of one proxy.
#[derive(Clone, Debug, Default)]
struct TypeState {
    /// name → encoded size.
    resources: BTreeMap<String, u64>,
    /// For EDS and RDS: the names asked for (CDS, LDS: wildcard).
    subscribed: BTreeSet<String>,
    /// A request of this type has been sent at least once.
    requested: bool,
    version: String,
    nonce: String,
    responses: u64,
    last_response: Option<Instant>,
    /// The last time names were added to the subscription.
    last_added: Option<Instant>,
}

impl TypeState {
    /// Subscribed, and the subscription has been answered.
    fn answered(&self) -> bool {
        match (self.last_response, self.last_added) {
            (Some(r), Some(a)) => r >= a,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// The client state machine of one proxy, without any I/O: it makes the
/// requests and consumes the responses. [`Sim`] drives it; it is public so
/// that the protocol can be tested on made-up responses.
#[derive(Clone, Debug)]
pub struct XdsState {
    node: Option<Node>,
    types: BTreeMap<&'static str, TypeState>,
    cluster_types: BTreeMap<String, ClusterType>,
    pushes: Vec<Push>,
    /// Resources that could not be decoded: they are left out of the maps
    /// (their bytes still count in the [`Push`]).
    decode_errors: Vec<String>,
    /// Track the clusters listeners and routes name ([`refs`]); off unless
    /// [`XdsState::track_references`] (it decodes every RDS resource).
    track_refs: bool,
    refs: RefState,
    /// With `track_refs`: per CDS push that changed the cluster set, the
    /// index of its [`Push`] and the clusters it added and removed.
    cds_changes: Vec<(usize, BTreeSet<String>, BTreeSet<String>)>,
}

impl XdsState {
    pub fn new(node: Node) -> Self {
        XdsState {
            node: Some(node),
            types: TYPES
                .iter()
                .map(|(s, _)| (*s, TypeState::default()))
                .collect(),
            cluster_types: BTreeMap::new(),
            pushes: Vec::new(),
            decode_errors: Vec::new(),
            track_refs: false,
            refs: RefState::default(),
            cds_changes: Vec::new(),
        }
    }

    /// From now on keep which clusters the listeners and route
    /// configurations name, and after every push applied, which of them the
    /// current CDS does not hold ([`XdsState::dangling`]).
    ///
    /// "The state after a push" is the state once that one response is
    /// applied (the simulator ACKs it right after): CDS and LDS replace
    /// their sets, RDS merges its resources, and route configurations no
    /// listener names any more are dropped. A cluster in CDS whose EDS has
    /// not arrived counts as held (Envoy warms it; it is not a missing
    /// cluster). So the window between a CDS push and the LDS/RDS pushes
    /// that follow it in the same istiod push cycle is counted: that is
    /// istio/istio#39837. [`refs::Episode::cause`] tells those transients
    /// apart from references that outlive a push cycle.
    pub fn track_references(&mut self) {
        self.track_refs = true;
    }

    fn request(&mut self, ty: &'static str) -> DiscoveryRequest {
        let type_url = TYPES.iter().find(|(s, _)| *s == ty).expect("known type").1;
        let st = self.types.get_mut(ty).expect("known type");
        st.requested = true;
        DiscoveryRequest {
            version_info: st.version.clone(),
            // Only the first request of the stream carries the node.
            node: self.node.take(),
            resource_names: st.subscribed.iter().cloned().collect(),
            type_url: type_url.to_string(),
            response_nonce: st.nonce.clone(),
            ..Default::default()
        }
    }

    /// The first requests: CDS (with the node) and LDS, both wildcard.
    pub fn initial_requests(&mut self) -> Vec<DiscoveryRequest> {
        vec![self.request("cds"), self.request("lds")]
    }

    /// Consume one response; returns the requests to send, in order: the
    /// ACK, then any EDS/RDS subscription changes it caused.
    pub fn on_response(&mut self, resp: &DiscoveryResponse, now: Instant) -> Vec<DiscoveryRequest> {
        let ty = short_type(&resp.type_url);
        let mut sized = Vec::with_capacity(resp.resources.len());
        let mut bytes = 0u64;
        let mut eds_wanted = BTreeSet::new();
        let mut rds_wanted = BTreeSet::new();
        let mut cluster_types = BTreeMap::new();
        let mut decoded_refs = Vec::new();
        for any in &resp.resources {
            let len = any.value.len() as u64;
            bytes += len;
            let name = match ty {
                Some("cds") => match Cluster::decode(any.value.as_slice()) {
                    Ok(c) => {
                        if let Some(n) = eds_resource_name(&c) {
                            eds_wanted.insert(n);
                        }
                        cluster_types.insert(c.name.clone(), ClusterType::of(&c));
                        Ok(c.name)
                    }
                    Err(e) => Err(anyhow!(e)),
                },
                Some("lds") => match Listener::decode(any.value.as_slice()) {
                    Ok(l) => {
                        rds_wanted.extend(route_names(&l));
                        if self.track_refs {
                            let found = (refs::listener_clusters(&l), refs::mentions(&any.value));
                            decoded_refs.push((l.name.clone(), found.0, found.1));
                        }
                        Ok(l.name)
                    }
                    Err(e) => Err(anyhow!(e)),
                },
                Some("rds") if self.track_refs => {
                    match RouteConfiguration::decode(any.value.as_slice()) {
                        Ok(rc) => {
                            let found = (refs::route_clusters(&rc), refs::mentions(&any.value));
                            decoded_refs.push((rc.name.clone(), found.0, found.1));
                            Ok(rc.name)
                        }
                        Err(e) => Err(anyhow!(e)),
                    }
                }
                _ => resource_name(any),
            };
            match name {
                Ok(n) => sized.push((n, len)),
                Err(e) => self
                    .decode_errors
                    .push(format!("{}: cannot decode a resource: {e}", resp.type_url)),
            }
        }
        self.pushes.push(Push {
            at: now,
            type_url: resp.type_url.clone(),
            ty: ty.unwrap_or("other"),
            version: resp.version_info.clone(),
            nonce: resp.nonce.clone(),
            resources: resp.resources.len(),
            bytes,
            wire_bytes: resp.encoded_len() as u64,
            acked_at: None,
        });

        let Some(ty) = ty else {
            // Not subscribed to; ACK it all the same.
            return vec![DiscoveryRequest {
                version_info: resp.version_info.clone(),
                type_url: resp.type_url.clone(),
                response_nonce: resp.nonce.clone(),
                ..Default::default()
            }];
        };
        {
            let st = self.types.get_mut(ty).expect("known type");
            st.version = resp.version_info.clone();
            st.nonce = resp.nonce.clone();
            st.responses += 1;
            st.last_response = Some(now);
            if ty == "cds" && self.track_refs {
                let new: BTreeSet<&String> = sized.iter().map(|(n, _)| n).collect();
                let added: BTreeSet<String> = new
                    .iter()
                    .filter(|n| !st.resources.contains_key(n.as_str()))
                    .map(|n| n.to_string())
                    .collect();
                let removed: BTreeSet<String> = st
                    .resources
                    .keys()
                    .filter(|n| !new.contains(n))
                    .cloned()
                    .collect();
                if !added.is_empty() || !removed.is_empty() {
                    self.cds_changes
                        .push((self.pushes.len() - 1, added, removed));
                }
            }
            match ty {
                "cds" | "lds" => replace_all(&mut st.resources, sized),
                _ => {
                    let subscribed = st.subscribed.clone();
                    merge_subscribed(&mut st.resources, sized, &subscribed)
                }
            }
        }
        let mut out = vec![self.request(ty)];
        let follow = match ty {
            "cds" => {
                self.cluster_types = cluster_types;
                Some(("eds", eds_wanted))
            }
            "lds" => Some(("rds", rds_wanted)),
            _ => None,
        };
        if let Some((dep, wanted)) = follow {
            if let Some(req) = self.resubscribe(dep, wanted, now) {
                out.push(req);
            }
        }
        if self.track_refs {
            self.check_references(ty, decoded_refs, &resp.nonce, now);
        }
        out
    }

    /// Updates the references with a push's decoded resources, and checks
    /// them against the current CDS.
    fn check_references(
        &mut self,
        ty: &'static str,
        decoded: Vec<(String, BTreeSet<String>, BTreeSet<String>)>,
        nonce: &str,
        now: Instant,
    ) {
        match ty {
            "lds" => self.refs.set_listeners(decoded),
            "rds" => self.refs.merge_routes(decoded),
            _ => {}
        }
        let routes = &self.types["rds"].resources;
        self.refs.retain_routes(|n| routes.contains_key(n));
        let clusters = &self.types["cds"].resources;
        self.refs
            .check(ty, nonce, now, |c| clusters.contains_key(c));
    }

    /// The dangling references found after each push (with
    /// [`XdsState::track_references`]); `proxy` is left empty.
    pub fn dangling(&self) -> &[DanglingRef] {
        self.refs.found()
    }

    /// The references the tracker holds now, and what it found over time.
    pub fn references(&self) -> &RefState {
        &self.refs
    }

    /// Change the subscription of `ty` to `wanted`; the request to send if
    /// it changed (or was never sent and `wanted` is not empty).
    fn resubscribe(
        &mut self,
        ty: &'static str,
        wanted: BTreeSet<String>,
        now: Instant,
    ) -> Option<DiscoveryRequest> {
        let st = self.types.get_mut(ty).expect("known type");
        if st.subscribed == wanted && (st.requested || wanted.is_empty()) {
            return None;
        }
        if !st.requested && wanted.is_empty() {
            return None;
        }
        let (added, _removed) = subscription_delta(&st.subscribed, &wanted);
        if !added.is_empty() || !st.requested {
            st.last_added = Some(now);
        }
        st.resources.retain(|n, _| wanted.contains(n));
        st.subscribed = wanted;
        Some(self.request(ty))
    }

    /// Mark every push not yet ACKed as ACKed at `at`.
    pub fn mark_acked(&mut self, at: Instant) {
        for p in self.pushes.iter_mut().rev() {
            if p.acked_at.is_some() {
                break;
            }
            p.acked_at = Some(at);
        }
    }

    /// CDS and LDS received, and the EDS and RDS subscriptions answered.
    pub fn ready(&self) -> bool {
        let t = &self.types;
        t["cds"].responses > 0
            && t["lds"].responses > 0
            && ["eds", "rds"]
                .iter()
                .all(|ty| t[ty].subscribed.is_empty() || t[ty].answered())
    }

    /// Why [`XdsState::ready`] is false, for error messages.
    pub fn waiting_for(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (ty, st) in &self.types {
            let needed = matches!(*ty, "cds" | "lds") || !st.subscribed.is_empty();
            if needed && !st.answered() {
                out.push(format!("{ty} ({} subscribed)", st.subscribed.len()));
            }
        }
        out
    }

    /// The current resources of a type (`"cds"`, ...): name → bytes.
    pub fn resources(&self, ty: &str) -> Option<&BTreeMap<String, u64>> {
        self.types.get(ty).map(|s| &s.resources)
    }

    /// The current EDS or RDS subscription.
    pub fn subscribed(&self, ty: &str) -> Option<&BTreeSet<String>> {
        self.types.get(ty).map(|s| &s.subscribed)
    }

    pub fn pushes(&self) -> &[Push] {
        &self.pushes
    }

    /// The CDS pushes that added or removed clusters, oldest first (with
    /// [`XdsState::track_references`]; empty otherwise).
    pub fn cluster_changes(&self) -> Vec<ClusterChange> {
        self.cds_changes
            .iter()
            .map(|(i, added, removed)| {
                let p = &self.pushes[*i];
                ClusterChange {
                    at: p.at,
                    acked_at: p.acked_at,
                    nonce: p.nonce.clone(),
                    added: added.clone(),
                    removed: removed.clone(),
                }
            })
            .collect()
    }

    pub fn cluster_types(&self) -> &BTreeMap<String, ClusterType> {
        &self.cluster_types
    }

    pub fn decode_errors(&self) -> &[String] {
        &self.decode_errors
    }

    fn last_rx(&self) -> Option<Instant> {
        self.pushes.last().map(|p| p.at)
    }
}

// ---------------------------------------------------------------------------
// Snapshots

/// Count and bytes of one type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeTotal {
    pub count: usize,
    pub bytes: u64,
}

/// What a proxy holds at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `ns/name`.
    pub proxy: String,
    /// `"cds"`, `"lds"`, `"rds"`, `"eds"` → resource name → encoded bytes.
    pub by_type: BTreeMap<String, BTreeMap<String, u64>>,
    pub totals: BTreeMap<String, TypeTotal>,
    pub total_bytes: u64,
    /// Cluster name → discovery type, from the last CDS response.
    pub cluster_types: BTreeMap<String, ClusterType>,
}

impl ProxyConfig {
    pub fn from_state(proxy: &str, st: &XdsState) -> Self {
        let mut c = ProxyConfig {
            proxy: proxy.to_string(),
            cluster_types: st.cluster_types.clone(),
            ..Default::default()
        };
        for (ty, ts) in &st.types {
            let total = TypeTotal {
                count: ts.resources.len(),
                bytes: ts.resources.values().sum(),
            };
            c.total_bytes += total.bytes;
            c.totals.insert(ty.to_string(), total);
            c.by_type.insert(ty.to_string(), ts.resources.clone());
        }
        c
    }

    /// Resource names of a type (`"cds"`, ...), sorted.
    pub fn names(&self, ty: &str) -> Vec<String> {
        self.by_type
            .get(ty)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn total(&self, ty: &str) -> TypeTotal {
        self.totals.get(ty).copied().unwrap_or_default()
    }

    /// `{"proxy":"ns/name","types":{"cds":{"count":..,"bytes":..,
    /// "resources":{"name":bytes,...}},...},"total_bytes":..}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut types = serde_json::Map::new();
        for (ty, res) in &self.by_type {
            let t = self.total(ty);
            types.insert(
                ty.clone(),
                serde_json::json!({
                    "count": t.count,
                    "bytes": t.bytes,
                    "resources": res,
                }),
            );
        }
        serde_json::json!({
            "proxy": self.proxy,
            "types": types,
            "total_bytes": self.total_bytes,
        })
    }
}

// ---------------------------------------------------------------------------
// The simulator

/// Connection options for [`Sim::connect_with`].
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// At most this many proxies open their stream and wait for their
    /// first response at the same time.
    pub concurrency: usize,
    /// Streams per HTTP/2 connection.
    pub proxies_per_channel: usize,
    /// The gRPC decode limit for one response.
    pub max_decoding_message_size: usize,
    pub connect_timeout: Duration,
    /// Tokio worker threads.
    pub worker_threads: usize,
    /// Open at most this many streams per second (0: no limit). istiod
    /// admits `PILOT_MAX_REQUESTS_PER_SECOND` new streams per second (25 on
    /// 2 cores) and refuses the rest after 1 s; refused openings are retried.
    pub connect_rate: f64,
    /// Tries to open a stream that istiod refuses with `ResourceExhausted`
    /// or `Unavailable`, before giving up and recording the error.
    pub open_attempts: u32,
    /// Track dangling references ([`XdsState::track_references`]). Off by
    /// default: it decodes every RDS resource, which benchmarks do not
    /// need.
    pub references: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            concurrency: 64,
            proxies_per_channel: 100,
            max_decoding_message_size: 256 << 20,
            connect_timeout: Duration::from_secs(10),
            worker_threads: 2,
            connect_rate: 0.0,
            open_attempts: 200,
            references: false,
        }
    }
}

#[derive(Debug, Default)]
struct Conn {
    /// The stream is open (its response headers arrived).
    connected: bool,
    /// The stream has ended (an error or closed by istiod).
    ended: bool,
    errors: Vec<String>,
    open_attempts: u32,
}

struct ProxyShared {
    spec: ProxySpec,
    key: String,
    state: Mutex<XdsState>,
    conn: Mutex<Conn>,
    held: Mutex<Held>,
}

/// ACKs held back (see [`Proxy::hold_acks`]).
#[derive(Default)]
struct Held {
    on: bool,
    queue: Vec<DiscoveryRequest>,
    tx: Option<mpsc::UnboundedSender<DiscoveryRequest>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Is a stream open or ended, and what went wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnStatus {
    pub connected: bool,
    pub ended: bool,
    pub errors: Vec<String>,
    /// How many times the stream was opened (retries on istiod's rate
    /// limit included).
    pub open_attempts: u32,
}

/// One simulated proxy of a [`Sim`]. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<ProxyShared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("proxy", &self.inner.key)
            .finish()
    }
}

impl Proxy {
    pub fn spec(&self) -> &ProxySpec {
        &self.inner.spec
    }

    /// From now on the proxy does not answer pushes (no ACK, no new
    /// subscription), as an Envoy that is busy or stuck: istiod's sent and
    /// ACKed nonces then differ.
    pub fn hold_acks(&self) {
        lock(&self.inner.held).on = true;
    }

    /// Sends every held answer, in order, and answers pushes again.
    pub fn release_acks(&self) {
        let mut held = lock(&self.inner.held);
        held.on = false;
        let queue = std::mem::take(&mut held.queue);
        if let Some(tx) = &held.tx {
            for r in queue {
                let _ = tx.send(r);
            }
        }
        drop(held);
        lock(&self.inner.state).mark_acked(Instant::now());
    }

    /// `ns/name`.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    pub fn snapshot(&self) -> ProxyConfig {
        ProxyConfig::from_state(&self.inner.key, &lock(&self.inner.state))
    }

    /// Responses received at or after `t`, oldest first.
    pub fn pushes_since(&self, t: Instant) -> Vec<Push> {
        let st = lock(&self.inner.state);
        let from = st.pushes.partition_point(|p| p.at < t);
        st.pushes[from..].to_vec()
    }

    /// Every response received, oldest first.
    pub fn pushes(&self) -> Vec<Push> {
        lock(&self.inner.state).pushes.clone()
    }

    /// Every dangling reference found after a push (a listener or route
    /// naming a cluster the proxy's CDS did not hold), one per push it was
    /// found after; empty unless the [`Sim`] was made with
    /// [`SimOptions::references`].
    pub fn dangling(&self) -> Vec<DanglingRef> {
        let st = lock(&self.inner.state);
        let mut out = st.dangling().to_vec();
        for d in &mut out {
            d.proxy = self.inner.key.clone();
        }
        out
    }

    /// The dangling references from the push that made each to the push
    /// that ended it ([`refs::Episode::cause`] says why).
    pub fn dangling_episodes(&self) -> Vec<Episode> {
        lock(&self.inner.state).references().episodes().to_vec()
    }

    /// `lds/<listener>` and `rds/<route config>` → the clusters each names,
    /// now.
    pub fn referenced_clusters(&self) -> BTreeMap<String, BTreeSet<String>> {
        lock(&self.inner.state).references().referenced()
    }

    /// Per resource, cluster-like names in its bytes that the decoder does
    /// not read as references (a field [`refs`] does not know).
    pub fn undecoded_mentions(&self) -> BTreeMap<String, BTreeSet<String>> {
        lock(&self.inner.state).references().undecoded().clone()
    }

    /// The CDS pushes that added or removed clusters, oldest first, with
    /// their ACKs; empty unless the [`Sim`] was made with
    /// [`SimOptions::references`].
    pub fn cluster_changes(&self) -> Vec<ClusterChange> {
        lock(&self.inner.state).cluster_changes()
    }

    /// How many pushes were checked for dangling references.
    pub fn pushes_checked(&self) -> u64 {
        lock(&self.inner.state).references().checked()
    }

    /// The current CDS cluster names, sorted.
    pub fn cluster_names(&self) -> Vec<String> {
        lock(&self.inner.state).types["cds"]
            .resources
            .keys()
            .cloned()
            .collect()
    }

    /// Cluster name → discovery type (EDS, STRICT_DNS, ORIGINAL_DST, ...).
    pub fn cluster_types(&self) -> BTreeMap<String, ClusterType> {
        lock(&self.inner.state).cluster_types.clone()
    }

    /// The current EDS (`"eds"`) or RDS (`"rds"`) subscription.
    pub fn subscribed(&self, ty: &str) -> BTreeSet<String> {
        lock(&self.inner.state)
            .subscribed(ty)
            .cloned()
            .unwrap_or_default()
    }

    pub fn ready(&self) -> bool {
        lock(&self.inner.state).ready()
    }

    pub fn status(&self) -> ConnStatus {
        let c = lock(&self.inner.conn);
        let mut errors = c.errors.clone();
        errors.extend(lock(&self.inner.state).decode_errors.iter().cloned());
        ConnStatus {
            connected: c.connected,
            ended: c.ended,
            errors,
            open_attempts: c.open_attempts,
        }
    }

    pub fn is_connected(&self) -> bool {
        lock(&self.inner.conn).connected
    }

    /// Stream errors and resource decode errors, oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.status().errors
    }

    /// When this proxy last received a response.
    pub fn last_received(&self) -> Option<Instant> {
        lock(&self.inner.state).last_rx()
    }

    fn record_error(&self, e: String) {
        let mut c = lock(&self.inner.conn);
        c.errors.push(e);
        c.connected = false;
        c.ended = true;
    }
}

/// Many simulated proxies connected to one istiod. Dropping it closes the
/// streams (istiod then forgets the proxies).
pub struct Sim {
    rt: Option<tokio::runtime::Runtime>,
    proxies: Vec<Proxy>,
    by_key: BTreeMap<String, usize>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("proxies", &self.proxies.len())
            .finish()
    }
}

/// `http://` is added to an address without a scheme.
fn endpoint_uri(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

impl Sim {
    /// Connect `specs` to istiod's plaintext gRPC address (`--grpcAddr`,
    /// e.g. `127.0.0.1:15010` or `http://127.0.0.1:15010`), with at most
    /// `concurrency` proxies starting at once. Returns when the HTTP/2
    /// connections are up and the streams are being opened; fails if a
    /// connection cannot be made. Stream errors are recorded per proxy.
    pub fn connect_many(addr: &str, specs: Vec<ProxySpec>, concurrency: usize) -> Result<Sim> {
        Sim::connect_with(
            addr,
            specs,
            SimOptions {
                concurrency,
                ..SimOptions::default()
            },
        )
    }

    /// [`connect_with`](Self::connect_with), then until the config settles
    /// (1.5 s without a push, 90 s at most): how a test with simulated
    /// sidecars starts. Panics, naming the step, when either fails.
    pub fn connect_settled(addr: &str, specs: Vec<ProxySpec>, opts: SimOptions) -> Sim {
        let sim = Sim::connect_with(addr, specs, opts).expect("sidecars connect");
        sim.wait_stable(Duration::from_millis(1500), Duration::from_secs(90))
            .expect("config settles");
        sim
    }

    /// [`connect_settled`](Self::connect_settled) with `concurrency` and
    /// the other options' defaults.
    pub fn connect_many_settled(addr: &str, specs: Vec<ProxySpec>, concurrency: usize) -> Sim {
        let opts = SimOptions {
            concurrency,
            ..SimOptions::default()
        };
        Sim::connect_settled(addr, specs, opts)
    }

    /// One proxy.
    pub fn connect(addr: &str, spec: ProxySpec) -> Result<Sim> {
        Sim::connect_many(addr, vec![spec], 1)
    }

    pub fn connect_with(addr: &str, specs: Vec<ProxySpec>, opts: SimOptions) -> Result<Sim> {
        let mut by_key = BTreeMap::new();
        for (i, s) in specs.iter().enumerate() {
            if by_key.insert(s.key(), i).is_some() {
                bail!("proxy {} is listed twice", s.key());
            }
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.worker_threads.max(1))
            .thread_name("xds-sim")
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let uri = endpoint_uri(addr);
        let per = opts.proxies_per_channel.max(1);
        let channels = specs.len().div_ceil(per).max(1);
        let endpoint = Endpoint::from_shared(uri.clone())
            .with_context(|| format!("bad istiod address {addr:?}"))?
            .connect_timeout(opts.connect_timeout)
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(32 << 20));
        let chans: Vec<Channel> = rt.block_on(async {
            let mut v = Vec::with_capacity(channels);
            for _ in 0..channels {
                let ch = endpoint
                    .connect()
                    .await
                    .with_context(|| format!("connecting to istiod at {uri}"))?;
                v.push(ch);
            }
            Ok::<_, anyhow::Error>(v)
        })?;
        let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
        let stop = Arc::new(AtomicBool::new(false));
        let run_opts = Arc::new(RunOpts {
            max_decoding: opts.max_decoding_message_size,
            open_attempts: opts.open_attempts.max(1),
            pacer: Pacer::new(opts.connect_rate),
            references: opts.references,
        });
        let mut proxies = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let p = Proxy {
                inner: Arc::new(ProxyShared {
                    key: spec.key(),
                    state: Mutex::new(new_state(&spec, opts.references)),
                    spec,
                    conn: Mutex::new(Conn::default()),
                    held: Mutex::new(Held::default()),
                }),
            };
            rt.spawn(run_proxy(
                chans[i / per].clone(),
                run_opts.clone(),
                p.clone(),
                sem.clone(),
                stop.clone(),
            ));
            proxies.push(p);
        }
        Ok(Sim {
            rt: Some(rt),
            proxies,
            by_key,
            stop,
        })
    }

    pub fn proxies(&self) -> &[Proxy] {
        &self.proxies
    }

    /// The proxy `ns/name`.
    pub fn get(&self, key: &str) -> Option<&Proxy> {
        self.by_key.get(key).map(|i| &self.proxies[*i])
    }

    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    pub fn snapshots(&self) -> Vec<ProxyConfig> {
        self.proxies.iter().map(Proxy::snapshot).collect()
    }

    /// When any proxy last received a response.
    pub fn last_received(&self) -> Option<Instant> {
        self.proxies.iter().filter_map(Proxy::last_received).max()
    }

    /// After a change made at `t0`: wait until some proxy has received a
    /// push since then, then until the config is stable again
    /// ([`wait_stable`](Self::wait_stable)). Without the first wait, a
    /// change istiod has not pushed yet looks stable.
    pub fn wait_push_after(
        &self,
        t0: Instant,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        while self.last_received().is_none_or(|t| t < t0) {
            if Instant::now() > deadline {
                bail!("no push within {timeout:?} of the change");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.wait_stable(quiet, deadline.saturating_duration_since(Instant::now()))
    }

    /// Wait until no proxy has received anything for `quiet`, and every
    /// proxy has CDS and LDS and the EDS and RDS it subscribed to. Returns
    /// the time of the last response received. Fails after `timeout`, or
    /// as soon as a proxy's stream has ended.
    pub fn wait_stable(&self, quiet: Duration, timeout: Duration) -> Result<Instant> {
        let start = Instant::now();
        let tick = (quiet / 4).clamp(Duration::from_millis(2), Duration::from_millis(25));
        loop {
            if let Some(p) = self.proxies.iter().find(|p| lock(&p.inner.conn).ended) {
                bail!(
                    "proxy {}: xDS stream ended: {}",
                    p.key(),
                    lock(&p.inner.conn).errors.join("; ")
                );
            }
            let ready = self.proxies.iter().all(Proxy::ready);
            let last = self.last_received();
            if let (true, Some(last)) = (ready, last) {
                if last.elapsed() >= quiet {
                    return Ok(last);
                }
            }
            if start.elapsed() >= timeout {
                let waiting: Vec<String> = self
                    .proxies
                    .iter()
                    .filter(|p| !p.ready())
                    .take(5)
                    .map(|p| {
                        let st = lock(&p.inner.state);
                        format!("{} waits for {}", p.key(), st.waiting_for().join(", "))
                    })
                    .collect();
                let not_ready = self.proxies.iter().filter(|p| !p.ready()).count();
                if not_ready == 0 {
                    bail!(
                        "xDS config not stable after {timeout:?}: pushes still arriving (last {:?} ago)",
                        last.map(|l| l.elapsed())
                    );
                }
                bail!(
                    "xDS config not complete after {timeout:?}: {not_ready} of {} proxies not ready ({})",
                    self.proxies.len(),
                    waiting.join("; ")
                );
            }
            std::thread::sleep(tick);
        }
    }

    /// Close every stream and stop the runtime (waits up to 2 s).
    pub fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Spaces out stream openings: at most `rate` per second.
struct Pacer {
    interval: Duration,
    next: tokio::sync::Mutex<tokio::time::Instant>,
}

impl Pacer {
    fn new(rate: f64) -> Option<Arc<Pacer>> {
        (rate > 0.0 && rate.is_finite()).then(|| {
            Arc::new(Pacer {
                interval: Duration::from_secs_f64(1.0 / rate),
                next: tokio::sync::Mutex::new(tokio::time::Instant::now()),
            })
        })
    }

    async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock().await;
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// A status on opening the stream that is worth another try: istiod's
/// connection rate limit (`PILOT_MAX_REQUESTS_PER_SECOND`, by default
/// 15 + 5 × cores per second with a 1 s wait, then `ResourceExhausted`), or
/// istiod not ready yet.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::ResourceExhausted | tonic::Code::Unavailable
    )
}

/// A small per-proxy jitter (0..=`max_ms` ms) without a random source.
fn jitter(key: &str, attempt: u32, max_ms: u64) -> Duration {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(attempt);
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Duration::from_millis(h % (max_ms + 1))
}

struct RunOpts {
    max_decoding: usize,
    open_attempts: u32,
    pacer: Option<Arc<Pacer>>,
    references: bool,
}

fn new_state(spec: &ProxySpec, references: bool) -> XdsState {
    let mut st = XdsState::new(spec.node());
    if references {
        st.track_references();
    }
    st
}

async fn run_proxy(
    channel: Channel,
    opts: Arc<RunOpts>,
    proxy: Proxy,
    sem: Arc<Semaphore>,
    stop: Arc<AtomicBool>,
) {
    let mut permit = match sem.acquire_owned().await {
        Ok(p) => Some(p),
        Err(_) => return,
    };
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(opts.max_decoding);
    let mut attempt = 0u32;
    let (tx, mut inbound) = loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(p) = &opts.pacer {
            p.wait().await;
        }
        attempt += 1;
        lock(&proxy.inner.conn).open_attempts = attempt;
        let (tx, rx) = mpsc::unbounded_channel::<DiscoveryRequest>();
        // Queue the first requests before opening the stream: istiod sends
        // the response headers only with its first response. A retry starts
        // from a fresh state (nothing was received), node included.
        {
            let mut st = lock(&proxy.inner.state);
            if attempt > 1 {
                *st = new_state(&proxy.inner.spec, opts.references);
            }
            for r in st.initial_requests() {
                let _ = tx.send(r);
            }
        }
        let requests =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        match client.stream_aggregated_resources(requests).await {
            Ok(r) => break (tx, r.into_inner()),
            Err(status) if retryable(&status) && attempt < opts.open_attempts => {
                let backoff = Duration::from_millis(100 * u64::from(attempt.min(10)));
                tokio::time::sleep(backoff + jitter(&proxy.inner.key, attempt, 250)).await;
            }
            Err(status) => {
                proxy.record_error(format!(
                    "opening the ADS stream (attempt {attempt}): {status}"
                ));
                return;
            }
        }
    };
    lock(&proxy.inner.conn).connected = true;
    lock(&proxy.inner.held).tx = Some(tx.clone());
    loop {
        match inbound.message().await {
            Ok(Some(resp)) => {
                let now = Instant::now();
                let reqs = lock(&proxy.inner.state).on_response(&resp, now);
                drop(resp);
                {
                    let mut held = lock(&proxy.inner.held);
                    if held.on {
                        held.queue.extend(reqs);
                        permit.take();
                        continue;
                    }
                }
                for r in reqs {
                    if tx.send(r).is_err() {
                        proxy.record_error("the request stream closed".into());
                        return;
                    }
                }
                lock(&proxy.inner.state).mark_acked(Instant::now());
                // The first response lets the next proxy start.
                permit.take();
            }
            Ok(None) => {
                proxy.record_error("istiod closed the ADS stream".into());
                return;
            }
            Err(status) => {
                proxy.record_error(format!("ADS stream error: {status}"));
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::config::listener::v3::Filter;
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::Rds;

    fn spec() -> ProxySpec {
        ProxySpec::new("ns1", "a-0", "10.1.0.5")
            .with_label("app", "a")
            .with_label("version", "v1")
    }

    fn any<M: prost::Message>(type_url: &str, m: &M) -> Any {
        Any {
            type_url: type_url.into(),
            value: m.encode_to_vec(),
        }
    }

    fn cluster(name: &str, ty: cluster::DiscoveryType, service: &str) -> Any {
        let c = Cluster {
            name: name.into(),
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(ty as i32)),
            eds_cluster_config: (ty == cluster::DiscoveryType::Eds).then(|| {
                cluster::EdsClusterConfig {
                    service_name: service.into(),
                    ..Default::default()
                }
            }),
            ..Default::default()
        };
        any(CLUSTER_TYPE, &c)
    }

    fn hcm_filter(route: Option<&str>) -> Filter {
        let hcm = HttpConnectionManager {
            stat_prefix: "x".into(),
            route_specifier: Some(match route {
                Some(r) => RouteSpecifier::Rds(Rds {
                    route_config_name: r.into(),
                    ..Default::default()
                }),
                None => RouteSpecifier::RouteConfig(RouteConfiguration {
                    name: "inline".into(),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        Filter {
            name: "envoy.filters.network.http_connection_manager".into(),
            config_type: Some(filter::ConfigType::TypedConfig(any(HCM_TYPE, &hcm))),
        }
    }

    fn listener(name: &str, routes: &[&str]) -> Any {
        let mut l = Listener {
            name: name.into(),
            ..Default::default()
        };
        for r in routes {
            l.filter_chains.push(FilterChain {
                filters: vec![hcm_filter(Some(r))],
                ..Default::default()
            });
        }
        // An inline route table is not an RDS subscription.
        l.default_filter_chain = Some(FilterChain {
            filters: vec![hcm_filter(None)],
            ..Default::default()
        });
        any(LISTENER_TYPE, &l)
    }

    fn cla(name: &str, endpoints: usize) -> Any {
        let c = ClusterLoadAssignment {
            cluster_name: name.into(),
            endpoints: vec![Default::default(); endpoints],
            ..Default::default()
        };
        any(ENDPOINT_TYPE, &c)
    }

    fn route(name: &str) -> Any {
        any(
            ROUTE_TYPE,
            &RouteConfiguration {
                name: name.into(),
                ..Default::default()
            },
        )
    }

    fn resp(type_url: &str, version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: version.into(),
            type_url: type_url.into(),
            nonce: nonce.into(),
            resources,
            ..Default::default()
        }
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn str_field<'a>(s: &'a Struct, k: &str) -> &'a str {
        match &s.fields[k].kind {
            Some(Kind::StringValue(v)) => v,
            other => panic!("{k}: not a string: {other:?}"),
        }
    }

    #[test]
    fn node_id_and_metadata() {
        let s = spec();
        assert_eq!(
            s.node_id(),
            "sidecar~10.1.0.5~a-0.ns1~ns1.svc.cluster.local"
        );
        assert_eq!(s.proxy_id(), "a-0.ns1");
        assert_eq!(s.key(), "ns1/a-0");
        let node = s.node();
        assert_eq!(node.id, s.node_id());
        let md = node.metadata.unwrap();
        let mut keys: Vec<&str> = md.fields.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "CLUSTER_ID",
                "INSTANCE_IPS",
                "ISTIO_VERSION",
                "LABELS",
                "MESH_ID",
                "NAME",
                "NAMESPACE",
                "NODE_NAME",
                "PROXY_CONFIG",
                "SERVICE_ACCOUNT",
                "WORKLOAD_NAME"
            ]
        );
        assert_eq!(str_field(&md, "NAMESPACE"), "ns1");
        assert_eq!(str_field(&md, "NAME"), "a-0");
        assert_eq!(str_field(&md, "INSTANCE_IPS"), "10.1.0.5");
        assert_eq!(str_field(&md, "CLUSTER_ID"), "Kubernetes");
        assert_eq!(str_field(&md, "ISTIO_VERSION"), "1.31-dev");
        assert_eq!(str_field(&md, "SERVICE_ACCOUNT"), "default");
        assert_eq!(str_field(&md, "WORKLOAD_NAME"), "a-0");
        assert_eq!(str_field(&md, "MESH_ID"), "cluster.local");
        assert_eq!(str_field(&md, "NODE_NAME"), "meshscope-sim");
        let Some(Kind::StructValue(labels)) = &md.fields["LABELS"].kind else {
            panic!("LABELS is not a Struct");
        };
        assert_eq!(labels.fields.len(), 2);
        assert_eq!(str_field(labels, "app"), "a");
        assert_eq!(str_field(labels, "version"), "v1");
        let Some(Kind::StructValue(pc)) = &md.fields["PROXY_CONFIG"].kind else {
            panic!("PROXY_CONFIG is not a Struct");
        };
        assert!(pc.fields.is_empty());
        // The same spec gives the same metadata, and the same encoded size.
        assert_eq!(s.metadata(), spec().metadata());
        assert_eq!(s.node().encoded_len(), spec().node().encoded_len());
    }

    #[test]
    fn node_on_first_request_only() {
        let mut st = XdsState::new(spec().node());
        let init = st.initial_requests();
        assert_eq!(init.len(), 2);
        assert_eq!(init[0].type_url, CLUSTER_TYPE);
        assert!(init[0].node.is_some());
        assert_eq!(init[1].type_url, LISTENER_TYPE);
        assert!(init[1].node.is_none());
        assert!(init.iter().all(|r| r.resource_names.is_empty()
            && r.version_info.is_empty()
            && r.response_nonce.is_empty()));
        let out = st.on_response(&resp(CLUSTER_TYPE, "v1", "n1", vec![]), Instant::now());
        assert!(out.iter().all(|r| r.node.is_none()));
    }

    #[test]
    fn cluster_types_and_eds_names() {
        use cluster::DiscoveryType as T;
        let c =
            |n: &str, t: T, s: &str| Cluster::decode(cluster(n, t, s).value.as_slice()).unwrap();
        let eds = c("outbound|80||a.ns1.svc.cluster.local", T::Eds, "");
        assert_eq!(ClusterType::of(&eds), ClusterType::Eds);
        assert_eq!(
            eds_resource_name(&eds).as_deref(),
            Some("outbound|80||a.ns1.svc.cluster.local")
        );
        let named = c("x", T::Eds, "svc-x");
        assert_eq!(eds_resource_name(&named).as_deref(), Some("svc-x"));
        let dst = c("PassthroughCluster", T::OriginalDst, "");
        assert_eq!(ClusterType::of(&dst), ClusterType::OriginalDst);
        assert_eq!(ClusterType::of(&dst).as_str(), "ORIGINAL_DST");
        assert_eq!(eds_resource_name(&dst), None);
        let unset = Cluster {
            name: "BlackHoleCluster".into(),
            ..Default::default()
        };
        assert_eq!(ClusterType::of(&unset), ClusterType::Static);
        assert_eq!(
            ClusterType::of(&c("zipkin", T::StrictDns, "")).as_str(),
            "STRICT_DNS"
        );
    }

    #[test]
    fn route_names_from_listeners() {
        let l = Listener::decode(listener("0.0.0.0_80", &["80", "8080"]).value.as_slice()).unwrap();
        assert_eq!(route_names(&l), names(&["80", "8080"]));
        let l = Listener::decode(listener("virtualInbound", &[]).value.as_slice()).unwrap();
        assert!(route_names(&l).is_empty());
    }

    #[test]
    fn eds_merge_is_incremental_and_subscribed_only() {
        let mut m = BTreeMap::new();
        let sub = names(&["a", "b", "c"]);
        merge_subscribed(
            &mut m,
            [("a".into(), 10), ("b".into(), 20), ("c".into(), 30)],
            &sub,
        );
        assert_eq!(m.values().sum::<u64>(), 60);
        // Only b changed: a and c keep their sizes.
        merge_subscribed(&mut m, [("b".into(), 25)], &sub);
        assert_eq!(m["a"], 10);
        assert_eq!(m["b"], 25);
        assert_eq!(m["c"], 30);
        // c is no longer subscribed; a reply that still names it is ignored.
        let sub = names(&["a", "b"]);
        merge_subscribed(&mut m, [("c".into(), 31)], &sub);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
        // A wildcard response replaces everything.
        replace_all(&mut m, [("z".into(), 1)]);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["z"]);
        let (added, removed) = subscription_delta(&names(&["a", "b"]), &names(&["b", "c"]));
        assert_eq!(added, names(&["c"]));
        assert_eq!(removed, names(&["a"]));
    }

    #[test]
    fn protocol_subscribes_acks_and_follows_changes() {
        use cluster::DiscoveryType as T;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut st = XdsState::new(spec().node());
        st.initial_requests();
        assert!(!st.ready());

        // CDS: two EDS clusters and a passthrough one.
        let out = st.on_response(
            &resp(
                CLUSTER_TYPE,
                "c1",
                "n1",
                vec![
                    cluster("outbound|80||a", T::Eds, ""),
                    cluster("outbound|80||b", T::Eds, ""),
                    cluster("PassthroughCluster", T::OriginalDst, ""),
                ],
            ),
            at(1),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(
            (
                out[0].type_url.as_str(),
                out[0].version_info.as_str(),
                out[0].response_nonce.as_str()
            ),
            (CLUSTER_TYPE, "c1", "n1")
        );
        assert!(out[0].resource_names.is_empty());
        assert_eq!(out[1].type_url, ENDPOINT_TYPE);
        assert_eq!(out[1].resource_names, ["outbound|80||a", "outbound|80||b"]);
        assert_eq!(
            (out[1].version_info.as_str(), out[1].response_nonce.as_str()),
            ("", "")
        );
        assert_eq!(
            st.cluster_types()["PassthroughCluster"],
            ClusterType::OriginalDst
        );
        st.mark_acked(at(2));
        assert_eq!(st.pushes()[0].acked_at, Some(at(2)));

        // LDS: one listener with route 80.
        let out = st.on_response(
            &resp(
                LISTENER_TYPE,
                "l1",
                "n2",
                vec![listener("0.0.0.0_80", &["80"])],
            ),
            at(3),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].type_url, ROUTE_TYPE);
        assert_eq!(out[1].resource_names, ["80"]);
        assert!(!st.ready(), "EDS and RDS not answered yet");

        // EDS answers both; RDS answers.
        let out = st.on_response(
            &resp(
                ENDPOINT_TYPE,
                "e1",
                "n3",
                vec![cla("outbound|80||a", 1), cla("outbound|80||b", 2)],
            ),
            at(4),
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].resource_names, ["outbound|80||a", "outbound|80||b"]);
        assert_eq!(
            (out[0].version_info.as_str(), out[0].response_nonce.as_str()),
            ("e1", "n3")
        );
        st.on_response(&resp(ROUTE_TYPE, "r1", "n4", vec![route("80")]), at(5));
        assert!(st.ready());
        let b_size = st.resources("eds").unwrap()["outbound|80||b"];

        // Incremental EDS: only a changed.
        st.on_response(
            &resp(ENDPOINT_TYPE, "e2", "n5", vec![cla("outbound|80||a", 3)]),
            at(6),
        );
        let eds = st.resources("eds").unwrap();
        assert_eq!(eds.len(), 2);
        assert_eq!(eds["outbound|80||b"], b_size);

        // CDS shrinks (a Sidecar): b goes; EDS is re-subscribed with the last
        // EDS version and nonce, and b is dropped at once.
        let out = st.on_response(
            &resp(
                CLUSTER_TYPE,
                "c2",
                "n6",
                vec![cluster("outbound|80||a", T::Eds, "")],
            ),
            at(7),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].resource_names, ["outbound|80||a"]);
        assert_eq!(
            (out[1].version_info.as_str(), out[1].response_nonce.as_str()),
            ("e2", "n5")
        );
        assert_eq!(st.resources("eds").unwrap().len(), 1);
        assert_eq!(st.resources("cds").unwrap().len(), 1);
        assert!(st.ready(), "a removal needs no answer");

        // LDS moves to route 8080; an RDS reply that still answers 80 is
        // not kept.
        let out = st.on_response(
            &resp(
                LISTENER_TYPE,
                "l2",
                "n7",
                vec![listener("0.0.0.0_8080", &["8080"])],
            ),
            at(8),
        );
        assert_eq!(out[1].resource_names, ["8080"]);
        assert_eq!(
            (out[1].version_info.as_str(), out[1].response_nonce.as_str()),
            ("r1", "n4")
        );
        assert!(!st.ready(), "8080 was added");
        let out = st.on_response(&resp(ROUTE_TYPE, "r2", "n8", vec![route("80")]), at(9));
        assert_eq!(
            out[0].resource_names,
            ["8080"],
            "the ACK keeps the new names"
        );
        assert!(st.resources("rds").unwrap().is_empty());
        st.on_response(&resp(ROUTE_TYPE, "r3", "n9", vec![route("8080")]), at(10));
        assert_eq!(
            st.resources("rds").unwrap().keys().collect::<Vec<_>>(),
            ["8080"]
        );

        // The same CDS again: no EDS request.
        let out = st.on_response(
            &resp(
                CLUSTER_TYPE,
                "c3",
                "n10",
                vec![cluster("outbound|80||a", T::Eds, "")],
            ),
            at(11),
        );
        assert_eq!(out.len(), 1);

        let snap = ProxyConfig::from_state("ns1/a-0", &st);
        assert_eq!(snap.names("cds"), ["outbound|80||a"]);
        assert_eq!(snap.total("eds").count, 1);
        assert_eq!(
            snap.total_bytes,
            snap.totals.values().map(|t| t.bytes).sum::<u64>()
        );
        let j = snap.to_json();
        assert_eq!(j["proxy"], "ns1/a-0");
        assert_eq!(j["types"]["cds"]["count"], 1);
        assert!(
            j["types"]["cds"]["resources"]["outbound|80||a"]
                .as_u64()
                .unwrap()
                > 0
        );

        let pushes: Vec<&str> = st.pushes().iter().map(|p| p.ty).collect();
        assert_eq!(
            pushes,
            ["cds", "lds", "eds", "rds", "eds", "cds", "lds", "rds", "rds", "cds"]
        );
    }

    #[test]
    fn tracked_references_follow_lds_and_rds_and_find_what_cds_lacks() {
        use cluster::DiscoveryType as T;
        use envoy_types::pb::envoy::config::route::v3::{
            route, route_action, Route, RouteAction, VirtualHost,
        };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let routes_to = |name: &str, clusters: &[&str]| {
            let routes = clusters
                .iter()
                .map(|c| Route {
                    action: Some(route::Action::Route(RouteAction {
                        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                            c.to_string(),
                        )),
                        ..Default::default()
                    })),
                    ..Default::default()
                })
                .collect();
            any(
                ROUTE_TYPE,
                &RouteConfiguration {
                    name: name.into(),
                    virtual_hosts: vec![VirtualHost {
                        name: "vh".into(),
                        routes,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )
        };
        let mut st = XdsState::new(spec().node());
        st.track_references();
        st.initial_requests();
        let both = vec![
            cluster("outbound|80||a", T::Static, ""),
            cluster("outbound|80||b", T::Static, ""),
        ];
        st.on_response(&resp(CLUSTER_TYPE, "c1", "n1", both), at(1));
        st.on_response(
            &resp(
                LISTENER_TYPE,
                "l1",
                "n2",
                vec![listener("0.0.0.0_80", &["80"])],
            ),
            at(2),
        );
        let r1 = routes_to("80", &["outbound|80||a", "outbound|80||b"]);
        st.on_response(&resp(ROUTE_TYPE, "r1", "n3", vec![r1]), at(3));
        assert_eq!(
            st.references().referenced()["rds/80"],
            names(&["outbound|80||a", "outbound|80||b"])
        );
        assert!(st.dangling().is_empty());

        // A narrowing: CDS without b, then RDS without b's route.
        let only_a = vec![cluster("outbound|80||a", T::Static, "")];
        st.on_response(&resp(CLUSTER_TYPE, "c2", "n4", only_a), at(4));
        assert_eq!(st.dangling().len(), 1);
        assert_eq!(
            (st.dangling()[0].push, st.dangling()[0].nonce.as_str()),
            ("cds", "n4")
        );
        let r2 = routes_to("80", &["outbound|80||a"]);
        st.on_response(&resp(ROUTE_TYPE, "r2", "n5", vec![r2]), at(6));
        assert_eq!(st.dangling().len(), 1, "resolved by the RDS push");
        let e = &st.references().episodes()[0];
        assert_eq!(e.cause(), refs::Cause::CdsBeforeListenerOrRoute);
        assert_eq!(e.duration(at(99)), Duration::from_millis(2));

        // The listener goes: its route configuration is dropped with it.
        st.on_response(&resp(LISTENER_TYPE, "l2", "n6", vec![]), at(7));
        assert!(st.references().referenced().is_empty());
        assert_eq!(st.references().checked(), 6);
        assert!(st.references().undecoded().is_empty());
    }

    #[test]
    fn empty_subscriptions_are_not_sent_and_count_as_ready() {
        let mut st = XdsState::new(spec().node());
        st.initial_requests();
        let out = st.on_response(&resp(CLUSTER_TYPE, "c1", "n1", vec![]), Instant::now());
        assert_eq!(out.len(), 1, "no EDS request for no EDS cluster");
        st.on_response(&resp(LISTENER_TYPE, "l1", "n2", vec![]), Instant::now());
        assert!(st.ready());
    }

    #[test]
    fn unreachable_istiod_is_an_error() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = Sim::connect(&format!("127.0.0.1:{port}"), spec()).unwrap_err();
        assert!(
            format!("{err:#}").contains("connecting to istiod"),
            "{err:#}"
        );
    }

    /// With reference tracking, each CDS push that adds or drops clusters
    /// is kept with its ACK; one that changes nothing is not.
    #[test]
    fn cluster_changes_keep_what_each_cds_push_added_and_dropped() {
        use cluster::DiscoveryType as T;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let mut st = XdsState::new(spec().node());
        st.track_references();
        st.initial_requests();
        let a = || cluster("outbound|80||a", T::Static, "");
        let b = || cluster("outbound|80||b", T::Static, "");
        st.on_response(&resp(CLUSTER_TYPE, "c1", "n1", vec![a(), b()]), at(1));
        st.mark_acked(at(2));
        st.on_response(&resp(CLUSTER_TYPE, "c2", "n2", vec![a(), b()]), at(3));
        st.on_response(&resp(CLUSTER_TYPE, "c3", "n3", vec![a()]), at(4));
        let ch = st.cluster_changes();
        assert_eq!(ch.len(), 2, "{ch:#?}");
        assert_eq!(
            (ch[0].at, ch[0].acked_at, &ch[0].added, &ch[0].removed),
            (
                at(1),
                Some(at(2)),
                &set(&["outbound|80||a", "outbound|80||b"]),
                &set(&[])
            )
        );
        assert_eq!(
            (ch[1].nonce.as_str(), ch[1].acked_at, &ch[1].removed),
            ("n3", None, &set(&["outbound|80||b"]))
        );
        st.mark_acked(at(5));
        assert_eq!(st.cluster_changes()[1].acked_at, Some(at(5)));
    }
}
