//! The Kubernetes Gateway API objects meshscope reads
//! (`gateway.networking.k8s.io`): the routes (HTTPRoute, GRPCRoute,
//! TCPRoute, TLSRoute) and the ReferenceGrants that let a route bound to a
//! Gateway send requests to another namespace. Only the fields scoping
//! depends on are typed: whom a route attaches to (`parentRefs`), where it
//! sends requests (`backendRefs`), and what a grant permits. How istiod
//! turns routes into VirtualServices is in `crate::snapshot::routes`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

pub const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";

/// Which route kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKind {
    Http,
    Grpc,
    Tcp,
    Tls,
}

impl RouteKind {
    pub const ALL: [RouteKind; 4] = [
        RouteKind::Http,
        RouteKind::Grpc,
        RouteKind::Tcp,
        RouteKind::Tls,
    ];

    /// The kind as the API names it (`HTTPRoute`).
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Tls => "TLSRoute",
        }
    }

    /// The kind as kubectl's resource names spell it (`httproute`).
    pub fn singular(self) -> &'static str {
        match self {
            RouteKind::Http => "httproute",
            RouteKind::Grpc => "grpcroute",
            RouteKind::Tcp => "tcproute",
            RouteKind::Tls => "tlsroute",
        }
    }

    /// The resource's plural (`httproutes`).
    pub fn plural(self) -> &'static str {
        match self {
            RouteKind::Http => "httproutes",
            RouteKind::Grpc => "grpcroutes",
            RouteKind::Tcp => "tcproutes",
            RouteKind::Tls => "tlsroutes",
        }
    }

    pub fn of(kind: &str) -> Option<RouteKind> {
        RouteKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

/// One route of any kind.
#[derive(Clone, Debug, Deserialize)]
pub struct Route {
    /// Set by the reader from `kind` ([`RouteKind::of`]).
    #[serde(skip, default = "http")]
    pub kind: RouteKind,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: RouteSpec,
}

fn http() -> RouteKind {
    RouteKind::Http
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    /// The hostnames a route bound to a Gateway serves (none: all).
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<RouteRule>,
}

/// `spec.parentRefs[]`: a Gateway by default, a Service for a mesh route.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<u32>,
    #[serde(default)]
    pub section_name: Option<String>,
}

impl ParentRef {
    /// A Kubernetes Service (core group): the route is a mesh route.
    pub fn is_service(&self) -> bool {
        self.kind.as_deref() == Some("Service")
            && matches!(self.group.as_deref(), None | Some("") | Some("core"))
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
    /// `matches`, kept only to tell a catch-all rule.
    #[serde(default)]
    pub matches: Vec<serde_json::Value>,
}

impl RouteRule {
    /// Whether the rule matches every request: no matches, or one that
    /// tests nothing but the path prefix `/` (the API's default).
    /// istiod makes one HTTP route per match and stops at the first
    /// catch-all (`pilot/pkg/networking/core/route/route.go`, istio 1.31).
    pub fn catch_all(&self) -> bool {
        self.matches.is_empty() || self.matches.iter().any(catch_all_match)
    }
}

fn catch_all_match(m: &serde_json::Value) -> bool {
    let Some(fields) = m.as_object() else {
        return false;
    };
    fields.iter().all(|(k, v)| match k.as_str() {
        "path" => {
            v["type"].as_str().unwrap_or("PathPrefix") == "PathPrefix"
                && v["value"].as_str().unwrap_or("/") == "/"
        }
        _ => false,
    })
}

/// `rules[].backendRefs[]`: a Service by default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<u32>,
    #[serde(default)]
    pub weight: Option<u32>,
}

impl BackendRef {
    /// A Kubernetes Service (the default kind, core group).
    pub fn is_service(&self) -> bool {
        matches!(self.kind.as_deref(), None | Some("Service"))
            && matches!(self.group.as_deref(), None | Some("") | Some("core"))
    }
}

/// A Gateway API `Gateway`: only which it is matters here. istiod's
/// deployment controller runs its pods in its namespace, labelled
/// [`GATEWAY_NAME_LABEL`] with its name
/// (`pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go`, istio
/// 1.31).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Gateway {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GatewaySpec,
    /// `None` when the input has no status (a file): taken as ready.
    #[serde(default)]
    pub status: Option<GatewayStatus>,
}

/// A Gateway's status: istiod writes the addresses of a Gateway whose
/// Service exists (a waypoint's `<name>` Service's ClusterIP and
/// hostname), and only a Gateway with some is a waypoint
/// (`gatewayToWaypointTransform`,
/// `pilot/pkg/serviceregistry/ambient/waypoints.go`, istio 1.31).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct GatewayStatus {
    #[serde(default)]
    pub addresses: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    #[serde(default)]
    pub gateway_class_name: String,
    /// Which routes bind, and for which hostnames
    /// ([`crate::gateway_listeners`]).
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

/// One listener of a Gateway (the fields admission depends on).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub port: u32,
    #[serde(default)]
    pub protocol: String,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub allowed_routes: Option<AllowedRoutes>,
    #[serde(default)]
    pub tls: Option<ListenerTls>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ListenerTls {
    #[serde(default)]
    pub mode: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct AllowedRoutes {
    #[serde(default)]
    pub namespaces: Option<RouteNamespaces>,
    #[serde(default)]
    pub kinds: Vec<RouteGroupKind>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RouteNamespaces {
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub selector: Option<crate::visibility::RawSelector>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RouteGroupKind {
    #[serde(default)]
    pub group: Option<String>,
    pub kind: String,
}

/// A `GatewayClass`: which controller implements the Gateways of the class.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct GatewayClass {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GatewayClassSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    #[serde(default)]
    pub controller_name: String,
}

/// The controllers whose Gateways istiod turns into configuration (routes
/// bound, pods served): its own, its waypoints' and its east-west
/// gateways' (`GetClassInfos`,
/// `pilot/pkg/config/kube/gatewaycommon/classinfo.go`, istio 1.31).
pub const ISTIOD_CONTROLLERS: [&str; 3] = [
    "istio.io/gateway-controller",
    "istio.io/mesh-controller",
    "istio.io/eastwest-controller",
];

/// The classes istiod knows without a GatewayClass object, and their
/// controllers (`GetBuiltinGatewayClasses`, there).
const BUILTIN_CLASSES: [(&str, &str); 4] = [
    ("istio", "istio.io/gateway-controller"),
    ("istio-waypoint", "istio.io/mesh-controller"),
    ("istio-east-west", "istio.io/eastwest-controller"),
    ("istio-remote", "istio.io/unmanaged-gateway"),
];

/// The controller of Gateway `g`'s class when it is not one istiod
/// configures: the GatewayClass of that name in `classes`, else a built-in
/// class. `None` when istiod configures it, or when the class is unknown
/// here (not in the input and not built in: counted as istiod's, so that
/// nothing it may route is left out).
pub fn foreign_controller(g: &Gateway, classes: &[GatewayClass]) -> Option<String> {
    let name = g.spec.gateway_class_name.as_str();
    let controller = classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .map(|c| c.spec.controller_name.as_str())
        .or_else(|| {
            BUILTIN_CLASSES
                .iter()
                .find(|(class, _)| *class == name)
                .map(|(_, c)| *c)
        })?;
    (!ISTIOD_CONTROLLERS.contains(&controller)).then(|| controller.to_string())
}

/// The label on the pods that serve a Gateway API Gateway: its name.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// A `ReferenceGrant` (istio 1.31 reads `v1beta1`; v1 has the same
/// fields): objects of the kinds in `from`, in the namespaces named there,
/// may refer to the objects of the kinds (and names) in `to` in the
/// grant's own namespace.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ReferenceGrant {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GrantSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GrantSpec {
    #[serde(default)]
    pub from: Vec<GrantFrom>,
    #[serde(default)]
    pub to: Vec<GrantTo>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GrantFrom {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GrantTo {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    /// None: every object of the kind.
    #[serde(default)]
    pub name: Option<String>,
}

/// Whether istiod lets a route of `kind` in `route_ns`, bound to a
/// Gateway, send requests to `b`: a backend in the route's own namespace
/// (or naming none) always; one in another namespace only when it is a
/// Service and a ReferenceGrant there permits routes of that kind from
/// `route_ns` to it by name or to every Service. A grant cannot permit
/// another kind (a ServiceEntry in another namespace is refused whatever
/// grant exists). Mesh routes are not checked. (`buildDestination` in
/// `pilot/pkg/config/kube/gateway/conversion.go` and `BackendAllowed` in
/// `pilot/pkg/config/kube/gatewaycommon/references.go`, istio 1.31.)
pub fn backend_allowed(
    grants: &[ReferenceGrant],
    kind: RouteKind,
    route_ns: &str,
    b: &BackendRef,
) -> bool {
    let Some(bns) = b.namespace.as_deref().filter(|n| *n != route_ns) else {
        return true;
    };
    if !b.is_service() {
        return false;
    }
    grants
        .iter()
        .filter(|g| g.metadata.namespace.as_deref() == Some(bns))
        .filter(|g| {
            g.spec.from.iter().any(|f| {
                f.group == GATEWAY_API_GROUP && f.kind == kind.as_str() && f.namespace == route_ns
            })
        })
        .flat_map(|g| &g.spec.to)
        .any(|t| {
            matches!(t.group.as_str(), "" | "core")
                && t.kind == "Service"
                && t.name.as_deref().is_none_or(|n| n == b.name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_parent_makes_a_mesh_route_and_backends_default_to_services() {
        let r: Route = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "split", "namespace": "app"},
            "spec": {
                "parentRefs": [
                    {"group": "", "kind": "Service", "name": "a", "port": 80},
                    {"name": "public"}
                ],
                "rules": [{"backendRefs": [
                    {"name": "b", "port": 80, "weight": 50},
                    {"group": "networking.istio.io", "kind": "Hostname", "name": "x.example.com"}
                ]}]
            }
        }))
        .unwrap();
        assert!(r.spec.parent_refs[0].is_service());
        assert!(!r.spec.parent_refs[1].is_service());
        let b = &r.spec.rules[0].backend_refs;
        assert!(b[0].is_service() && !b[1].is_service());
        assert_eq!(RouteKind::of("TLSRoute"), Some(RouteKind::Tls));
        assert_eq!(RouteKind::of("Route"), None);
    }

    fn grant(ns: &str, from_kind: &str, from_ns: &str, name: Option<&str>) -> ReferenceGrant {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g", "namespace": ns},
            "spec": {
                "from": [{"group": GATEWAY_API_GROUP, "kind": from_kind, "namespace": from_ns}],
                "to": [{"group": "", "kind": "Service", "name": name}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_backend_in_another_namespace_needs_a_grant_for_the_route_kind_and_namespace() {
        let b = |ns: Option<&str>, kind: Option<&str>| BackendRef {
            name: "front".into(),
            namespace: ns.map(String::from),
            kind: kind.map(String::from),
            group: kind.map(|_| "networking.istio.io".into()),
            ..Default::default()
        };
        let front = b(Some("shop"), None);
        let http = RouteKind::Http;
        assert!(backend_allowed(&[], http, "ing", &b(None, None)));
        assert!(backend_allowed(&[], http, "shop", &front));
        assert!(!backend_allowed(&[], http, "ing", &front));
        let by_name = grant("shop", "HTTPRoute", "ing", Some("front"));
        let every = grant("shop", "HTTPRoute", "ing", None);
        assert!(backend_allowed(
            std::slice::from_ref(&by_name),
            http,
            "ing",
            &front
        ));
        assert!(backend_allowed(
            std::slice::from_ref(&every),
            http,
            "ing",
            &front
        ));
        // Another name, kind of route, source namespace, or grant namespace.
        let other = grant("shop", "HTTPRoute", "ing", Some("cart"));
        assert!(!backend_allowed(&[other], http, "ing", &front));
        assert!(!backend_allowed(
            std::slice::from_ref(&by_name),
            RouteKind::Grpc,
            "ing",
            &front
        ));
        assert!(!backend_allowed(&[by_name], http, "edge", &front));
        assert!(!backend_allowed(
            &[grant("ing", "HTTPRoute", "ing", None)],
            http,
            "ing",
            &front
        ));
        // A grant permits Services only.
        let se = b(Some("shop"), Some("ServiceEntry"));
        assert!(!backend_allowed(&[every], http, "ing", &se));
    }
}
