//! Serde types for the Istio resources meshscope reads and writes.
//!
//! Only the fields that scoping depends on are typed; everything else in a
//! spec is kept in `extra` so that a round trip through these types loses
//! nothing the user wrote.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const NETWORKING_GROUP: &str = "networking.istio.io";

/// `networking.istio.io/v1` Sidecar.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    #[serde(default = "sidecar_api_version")]
    pub api_version: String,
    #[serde(default = "sidecar_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SidecarSpec,
}

fn sidecar_api_version() -> String {
    "networking.istio.io/v1".into()
}
fn sidecar_kind() -> String {
    "Sidecar".into()
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<WorkloadSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressListener>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct WorkloadSelector {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EgressListener {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<ListenerPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_mode: Option<String>,
    #[serde(default)]
    pub hosts: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct ListenerPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `networking.istio.io` ServiceEntry.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ServiceEntry {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ServiceEntrySpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEntrySpec {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub ports: Vec<ServiceEntryPort>,
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub resolution: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<Value>,
    #[serde(default)]
    pub workload_selector: Option<WorkloadSelector>,
    #[serde(default)]
    pub export_to: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEntryPort {
    #[serde(default)]
    pub number: u32,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub target_port: Option<u32>,
}

/// `networking.istio.io` VirtualService (the parts that decide imports).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct VirtualService {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VirtualServiceSpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualServiceSpec {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub gateways: Vec<String>,
    #[serde(default)]
    pub http: Vec<HttpRoute>,
    #[serde(default)]
    pub tcp: Vec<L4Route>,
    #[serde(default)]
    pub tls: Vec<L4Route>,
    #[serde(default)]
    pub export_to: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    #[serde(default, rename = "match")]
    pub matches: Vec<HttpMatch>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
    #[serde(default)]
    pub mirror: Option<Destination>,
    #[serde(default)]
    pub mirrors: Vec<RouteDestination>,
    /// Routes taken from another VirtualService (one without hosts).
    #[serde(default)]
    pub delegate: Option<Delegate>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Delegate {
    #[serde(default)]
    pub name: String,
    /// Empty: the delegating VirtualService's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatch {
    #[serde(default)]
    pub source_namespace: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct L4Route {
    #[serde(default, rename = "match")]
    pub matches: Vec<L4Match>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// A `tcp` or `tls` route's match: the port it is for (none: any).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct L4Match {
    #[serde(default)]
    pub port: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct RouteDestination {
    #[serde(default)]
    pub destination: Option<Destination>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Destination {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub subset: Option<String>,
    #[serde(default)]
    pub port: Option<PortSelector>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PortSelector {
    #[serde(default)]
    pub number: Option<u32>,
}

/// `networking.istio.io` DestinationRule (the parts that decide lookup and size).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DestinationRule {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: DestinationRuleSpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRuleSpec {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub subsets: Vec<Value>,
    #[serde(default)]
    pub export_to: Option<Vec<String>>,
    /// `workloadSelector.matchLabels` (the type policies use, unlike a
    /// Sidecar's `labels`).
    #[serde(default)]
    pub workload_selector: Option<PolicySelector>,
}

/// `networking.istio.io` Gateway: which pods serve it (its `selector`,
/// over every namespace), and the hosts its servers admit. Its servers do
/// not decide any scope.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Gateway {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GatewaySpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct GatewaySpec {
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    #[serde(default)]
    pub servers: Vec<GatewayServer>,
}

/// One server of an Istio Gateway: the hosts whose VirtualServices it
/// admits (`[namespace/]host`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct GatewayServer {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub tls: Option<ServerTls>,
    #[serde(default)]
    pub port: Option<ServerPort>,
}

/// A Gateway server's `port`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ServerPort {
    #[serde(default)]
    pub number: u32,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub protocol: String,
}

/// A Gateway server's `tls`: its `mode` (`AUTO_PASSTHROUGH` makes the
/// gateway an east-west one).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ServerTls {
    #[serde(default)]
    pub mode: Option<String>,
}

/// The annotation on an EnvoyFilter naming the Services its patches use:
/// with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG` on, a gateway keeps their
/// clusters only when named here (`convertToEnvoyFilterWrapper`,
/// `pilot/pkg/model/envoyfilter.go`, istio 1.31).
pub const REFERENCED_SERVICES_ANNOTATION: &str = "envoyfilter.istio.io/referenced-services";

/// `networking.istio.io` EnvoyFilter: which proxies it applies to and the
/// Services it says its patches use (the annotation
/// [`REFERENCED_SERVICES_ANNOTATION`]). Its
/// patches are kept as written, to find the clusters they name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct EnvoyFilter {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: EnvoyFilterSpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvoyFilterSpec {
    #[serde(default)]
    pub workload_selector: Option<WorkloadSelector>,
    #[serde(default)]
    pub config_patches: Vec<Value>,
}

pub const TELEMETRY_GROUP: &str = "telemetry.istio.io";
pub const SECURITY_GROUP: &str = "security.istio.io";

/// A policy's `selector` (Telemetry, AuthorizationPolicy).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PolicySelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A provider named by a Telemetry.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct ProviderRef {
    #[serde(default)]
    pub name: String,
}

/// `match.mode` of a Telemetry entry: `CLIENT`, `SERVER` or
/// `CLIENT_AND_SERVER` (the default).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct ModeMatch {
    #[serde(default)]
    pub mode: Option<String>,
}

/// `telemetry.istio.io` Telemetry: the parts that name extension
/// providers.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Telemetry {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TelemetrySpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TelemetrySpec {
    #[serde(default)]
    pub selector: Option<PolicySelector>,
    #[serde(default)]
    pub target_ref: Option<Value>,
    #[serde(default)]
    pub target_refs: Vec<Value>,
    #[serde(default)]
    pub tracing: Vec<TelemetryTracing>,
    #[serde(default)]
    pub access_logging: Vec<TelemetryAccessLogging>,
    #[serde(default)]
    pub metrics: Vec<TelemetryMetrics>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TelemetryTracing {
    #[serde(default, rename = "match")]
    pub matches: Option<ModeMatch>,
    #[serde(default)]
    pub providers: Vec<ProviderRef>,
    #[serde(default)]
    pub disable_span_reporting: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TelemetryAccessLogging {
    #[serde(default, rename = "match")]
    pub matches: Option<ModeMatch>,
    #[serde(default)]
    pub providers: Vec<ProviderRef>,
    #[serde(default)]
    pub disabled: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct TelemetryMetrics {
    #[serde(default)]
    pub providers: Vec<ProviderRef>,
}

/// `security.istio.io` AuthorizationPolicy: the parts that decide which
/// ext_authz provider a workload calls.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct AuthorizationPolicy {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: AuthorizationPolicySpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationPolicySpec {
    #[serde(default)]
    pub selector: Option<PolicySelector>,
    #[serde(default)]
    pub target_ref: Option<Value>,
    #[serde(default)]
    pub target_refs: Vec<Value>,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub provider: Option<ProviderRef>,
}
