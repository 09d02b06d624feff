//! The Kubernetes Gateway API routes meshscope reads
//! (`gateway.networking.k8s.io`): HTTPRoute, GRPCRoute, TCPRoute and
//! TLSRoute. Only the fields scoping depends on are typed: whom a route
//! attaches to (`parentRefs`) and where it sends requests (`backendRefs`).
//! How istiod turns the mesh ones (a Service parent: GAMMA) into routes is
//! in `crate::snapshot::routes`.

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
}
